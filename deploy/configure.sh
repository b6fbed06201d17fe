#!/bin/sh
# Configure an installed course environment for a classroom (deploy/README.md):
#   deploy/configure.sh PREFIX        e.g. deploy/configure.sh /opt/tfcourse/venv
# - Formgrader and "Create Assignment" off for everyone (the instructor's configuration, installed
#   as PREFIX/etc/jupyter-instructor, turns them back on for instructors only);
# - the course-wide nbgrader configuration (course id, exchange) in PREFIX/etc/jupyter.
# Run it as the owner of PREFIX (root for a system-wide install) after every (re)install.
set -eu
PREFIX=$1
HERE=$(cd "$(dirname "$0")" && pwd)
# PREFIX's own programs, not `python -m jupyter ...`: that runs whichever `jupyter-server` comes first
# on PATH, and its --sys-prefix would be that other environment.
"$PREFIX/bin/jupyter-server" extension disable --sys-prefix nbgrader.server_extensions.formgrader
"$PREFIX/bin/jupyter-labextension" disable --level=sys_prefix @jupyter/nbgrader:formgrader
"$PREFIX/bin/jupyter-labextension" disable --level=sys_prefix @jupyter/nbgrader:create-assignment
mkdir -p "$PREFIX/etc/jupyter" "$PREFIX/etc/jupyter-instructor"
cp "$HERE/nbgrader_config.py" "$PREFIX/etc/jupyter/nbgrader_config.py"
cp -R "$HERE/instructor/." "$PREFIX/etc/jupyter-instructor/"
chmod -R a+rX "$PREFIX/etc/jupyter" "$PREFIX/etc/jupyter-instructor"
# rfc3987_syntax loaded on first use, not by every server and nbgrader command (~1.3 s each):
# jupyter-config/site-packages/tfcourse_lazy_iri.py says why. (install replaces, never writes through a link)
install -m 644 "$HERE/../jupyter-config/site-packages/tfcourse_lazy_iri.py" \
    "$HERE/../jupyter-config/site-packages/tfcourse_lazy_iri.pth" \
    "$("$PREFIX/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
