#!/usr/bin/env bash
# Set up .venv for agentgraphs on a fresh machine.
#   scripts/bootstrap.sh          # library + CLI + testing kit (enough for `agentgraphs demo`)
#   scripts/bootstrap.sh test     # + pytest, hypothesis, ...
# torch: a torch already importable (e.g. your CUDA build in the system site-packages) is kept;
# only where none is present is torch==2.13.0 installed (a CPU build on machines that ship it).
set -euo pipefail
cd "$(dirname "$0")/.."
extra="${1:-testing}"
python="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$python" -m venv --system-site-packages .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check --upgrade "pip>=24" >/dev/null
if ! .venv/bin/python -c "import torch" >/dev/null 2>&1; then
  .venv/bin/python -m pip install -q --disable-pip-version-check "torch==2.13.0"
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -e ".[${extra}]"
.venv/bin/python -c "import torch, agentgraphs, rl_bridge; print('agentgraphs', agentgraphs.__version__, 'torch', torch.__version__)"
