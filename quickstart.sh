#!/usr/bin/env bash
# Set up execgym on a fresh Debian/Ubuntu machine, then score HumanEval's 164 canonical
# solutions in bubblewrap sandboxes (the embedded default: no broker, no server).
#
#   ./quickstart.sh               set up and run the main job
#   ./quickstart.sh --setup-only  set up only (system packages, .venv with execgym)
set -euo pipefail
cd "$(dirname "$0")"

say() { printf 'quickstart: %s\n' "$*" >&2; }

# 1. System packages: bubblewrap (the sandbox), util-linux (setpriv, used as root),
#    and venv support for Python.
pick_python() {
  for candidate in python3.13 python3.12 python3.11 python3; do
    if command -v "$candidate" >/dev/null 2>&1 &&
       "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
      echo "$candidate"; return 0
    fi
  done
  return 1
}

missing=()
command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)
command -v setpriv >/dev/null 2>&1 || missing+=(util-linux)
PYTHON=$(pick_python || true)
if [ -z "$PYTHON" ]; then
  missing+=(python3 python3-venv)
elif ! "$PYTHON" -c 'import ensurepip, venv' >/dev/null 2>&1; then
  missing+=(python3-venv)
fi

if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -eq 0 ]; then SUDO=""
  elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then SUDO="sudo"
  else
    say "missing system packages: ${missing[*]}"
    say "install them with: sudo apt-get install -y ${missing[*]}   (then run this again)"
    exit 1
  fi
  say "installing system packages: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
  PYTHON=$(pick_python)
fi

# 2. The virtual environment in .venv/ with execgym and its test tools.
if [ ! -x .venv/bin/python ]; then
  say "creating .venv with $PYTHON"
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[dev]'
say "set up: .venv/bin/execgym $(.venv/bin/execgym --version | awk '{print $NF}')"

if [ "${1:-}" = "--setup-only" ]; then
  exit 0
fi

# 3. The main job: every canonical HumanEval solution, each in its own sandbox.
.venv/bin/execgym score --dataset humaneval --solutions canonical -o results.jsonl
