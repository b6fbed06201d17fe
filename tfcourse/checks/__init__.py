"""Exercise checks, one module per lesson (`core.py` holds the shared machinery). Test cells call
them with the learner's object, e.g. `from tfcourse.checks.ffn import check_feed_forward`."""
