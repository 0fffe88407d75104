#!/usr/bin/env bash
# Installs the official clients the end-to-end tests drive (integration/requirements.txt) into
# integration/.venv. Does nothing when that install is newer than the requirements file, so
# scripts/test can start it early (it is network-bound) while the build uses the CPUs.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=integration/.venv
if [ -x "$venv/bin/pytest" ] && [ ! integration/requirements.txt -nt "$venv/.requirements-installed" ]; then
  exit 0
fi
python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check --upgrade pip
# No bytecode at install time: Python compiles a module when it is first imported, and most of
# these packages' files never are; compiling all of them costs CPU the build needs.
"$venv/bin/pip" install --quiet --disable-pip-version-check --no-compile -r integration/requirements.txt
touch "$venv/.requirements-installed"
