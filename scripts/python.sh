# Sourced by scripts/check, demo and lock: the interpreter agentpool is built and tested
# on, CPython 3.12 (the image's; setup.cfg). PYTHON, when set, is used as given.
#   find_python        prints the interpreter's path, or says why there is none (exit 2)
#   venv_on PATH DIR   makes DIR a venv of PATH, again if it was made from another version
find_python() {
  if [ -n "${PYTHON:-}" ]; then
    echo "$PYTHON"
    return
  fi
  local candidate
  for candidate in python3.12 python3 "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12.*/bin/python3; do
    if "$candidate" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))' 2>/dev/null; then
      command -v "$candidate"
      return
    fi
  done
  echo "agentpool is built and tested on Python 3.12 (the image's): none found as python3.12," \
    "python3 or under pyenv; install it, or set PYTHON to an interpreter to try" >&2
  return 2
}

venv_on() {
  local python=$1 venv=$2 want have
  want=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  if [ -x "$venv/bin/python" ]; then
    have=$("$venv/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
    if [ "$have" = "$want" ]; then
      return
    fi
    echo "$venv is Python $have: making it again on $want" >&2
    "$python" -m venv --clear "$venv"
  else
    "$python" -m venv "$venv"
  fi
}
