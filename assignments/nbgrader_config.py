# nbgrader reads its configuration in the folder of the lessons a learner fetched (here) too: the
# course's own configuration, so that the Assignment List finds the course's exchange.
c = get_config()  # noqa: F821 - provided by nbgrader when it loads this file
load_subconfig("../nbgrader_config.py")  # noqa: F821
