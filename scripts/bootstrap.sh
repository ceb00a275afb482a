#!/usr/bin/env bash
# Set up .venv for agentgraphs on a fresh machine.
#   scripts/bootstrap.sh          # library + CLI + testing kit (enough for `agentgraphs demo`)
#   scripts/bootstrap.sh test     # + pytest and every optional extra the tests exercise, and the system
#                                 #   programs they drive (bubblewrap, Chromium, Graphviz) via apt when root
# torch: a torch already importable (e.g. your CUDA build in the system site-packages) is kept;
# only where none is present is torch==2.13.0 installed (a CPU build on machines that ship it).
set -euo pipefail
cd "$(dirname "$0")/.."
extra="${1:-testing}"
python="${PYTHON:-python3}"

if [ "$extra" = "test" ]; then
  # system programs the tests drive: the sandbox's namespaces, the viewer's browser, `draw`'s renderer
  missing=()
  command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)
  command -v chromium >/dev/null 2>&1 || missing+=(chromium)
  command -v dot >/dev/null 2>&1 || missing+=(graphviz)
  # the sandbox's unprivileged test run: setpriv, and a venv of the system python that uid 65534 can read
  command -v setpriv >/dev/null 2>&1 || missing+=(util-linux)
  if [ -x /usr/bin/python3 ] && ! /usr/bin/python3 -m ensurepip --version >/dev/null 2>&1; then
    missing+=(python3-venv)
  fi
  if [ "${#missing[@]}" -gt 0 ]; then
    if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
      echo "installing ${missing[*]} (apt)"
      apt-get update -qq >/dev/null
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    else
      echo "warning: ${missing[*]} not installed (needs root and apt): the tests that drive them will skip" >&2
    fi
  fi
fi

if [ ! -x .venv/bin/python ]; then
  "$python" -m venv --system-site-packages .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check --upgrade "pip>=24" >/dev/null
if ! .venv/bin/python -c "import torch" >/dev/null 2>&1; then
  .venv/bin/python -m pip install -q --disable-pip-version-check "torch==2.13.0"
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -e ".[${extra}]"
.venv/bin/python -c "import torch, agentgraphs, rl_bridge; print('agentgraphs', agentgraphs.__version__, 'torch', torch.__version__)"

if [ "$extra" = "test" ] && [ "$(id -u)" = "0" ] && command -v setpriv >/dev/null 2>&1; then
  # tests/sandbox/test_shapes.py re-runs the sandbox's escape suite as uid 65534, which cannot read a venv
  # under /root: it gets its own, world-readable, from the system python (pytest + pyseccomp only: the
  # sandbox is standalone). Bounded: 5 minutes at most, and kept when already complete.
  unpriv=/tmp/agentgraphs-unpriv-venv
  if ! "$unpriv/bin/python" -c "import pytest, pyseccomp" >/dev/null 2>&1; then
    rm -rf "$unpriv"
    if timeout 300 /usr/bin/python3 -m venv "$unpriv" && \
       timeout 300 "$unpriv/bin/python" -m pip install -q --disable-pip-version-check pytest "pyseccomp>=0.1.2"; then
      chmod -R a+rX "$unpriv"
      echo "built $unpriv for the unprivileged sandbox tests"
    else
      echo "warning: could not build $unpriv: the unprivileged sandbox test will fail and say so" >&2
    fi
  fi
fi
