#!/usr/bin/env bash
# Download, here, the wheels that tests/gpu and the CUDA bench need on the lent GPU machine
# (no network there) into .whl/ (ignored through .git/info/exclude), for CPython 3.12 on
# manylinux x86-64. Then a session carries `.whl` and runs `bash scripts/gpu-check.sh`.
#
# Only what that machine's image lacks: its python3 (3.12.3) already holds torch, numpy,
# pytest (with pytest-timeout), hypothesis, nvidia-ml-py, psutil, attrs, packaging, pygments,
# python-dateutil, six and typing-extensions (docs of the device tool: KINDS.md's list). What
# it lacks is the Jupyter kernel stack: ipykernel, jupyter_client, comm, IPython, pyzmq,
# tornado, traitlets, jsonschema and their needs. Versions: the project's .venv's.
# pytest-jupyter (and jupyter_server behind it) is not carried: gpu-check.sh runs tests/gpu
# with --noconftest, since those tests use none of tests/conftest.py's fixtures.
#
#   bash scripts/gpu-wheels.sh                      # .whl/ for the GPU machine
#   PYVER=3.11 DEST=/tmp/w bash scripts/gpu-wheels.sh   # another Python (a local simulation)
#
# DEST is emptied of wheels first: two versions of one package stop the install there.
set -euo pipefail
cd "$(dirname "$0")/.."

PYVER=${PYVER:-3.12}
DEST=${DEST:-.whl}
PY=${PYTHON:-python3}

# name==version, one per package; the dependency closure of ipykernel, jupyter_client,
# comm and jsonschema for CPython 3.12 on Linux, less what the GPU machine has.
WHEELS=(
  asttokens==3.0.2
  comm==0.2.3
  debugpy==1.8.22
  executing==2.3.0
  ipykernel==7.4.0
  ipython==9.18.1
  ipython-pygments-lexers==1.1.1
  jedi==0.20.1
  jsonschema==4.26.0
  jsonschema-specifications==2025.9.1
  jupyter-client==8.10.0
  jupyter-core==5.9.1
  matplotlib-inline==0.2.2
  nest-asyncio2==1.7.4
  parso==0.8.7
  pexpect==4.9.0
  platformdirs==4.14.9
  prompt-toolkit==3.0.53
  ptyprocess==0.7.0
  pure-eval==0.2.4
  pyzmq==27.3.0
  referencing==0.37.0
  rpds-py==2026.9.1
  stack-data==0.6.3
  tornado==6.6.1
  traitlets==5.16.1
  wcwidth==0.9.4
)

# pip matches each manylinux_2_N tag exactly. Up to glibc 2.28 only: the GPU machine's
# glibc was not read (its Python 3.12.3 suggests a newer one); debugpy then comes pure.
PLATFORMS=(--platform manylinux2014_x86_64 --platform manylinux1_x86_64)
for n in $(seq 5 28); do
  PLATFORMS+=(--platform "manylinux_2_${n}_x86_64")
done

if [ "$DEST" = .whl ]; then
  exclude=$(git rev-parse --git-path info/exclude)
  mkdir -p "$(dirname "$exclude")"
  grep -qxF /.whl/ "$exclude" 2>/dev/null || echo /.whl/ >>"$exclude"
fi

mkdir -p "$DEST"
rm -f "$DEST"/*.whl
"$PY" -m pip download -q --no-deps --only-binary=:all: \
  --python-version "$PYVER" --implementation cp "${PLATFORMS[@]}" \
  -d "$DEST" "${WHEELS[@]}"

# Exactly one wheel per name, and nothing else.
count=$(find "$DEST" -maxdepth 1 -type f -name '*.whl' | wc -l)
if [ "$count" -ne "${#WHEELS[@]}" ]; then
  echo "expected ${#WHEELS[@]} wheels in $DEST, found $count" >&2
  exit 1
fi
for f in "$DEST"/*.whl; do echo "${f##*/}"; done
du -ch "$DEST"/*.whl | tail -n 1 | sed "s|total|total in $DEST (CPython $PYVER, ${#WHEELS[@]} wheels)|"
if [ "$DEST" = .whl ]; then
  tree=$({ git ls-files -z; git ls-files -z --others --exclude-standard; } |
    du -cb --files0-from=- 2>/dev/null | tail -n 1 | cut -f1)
  wheels=$(du -cb "$DEST"/*.whl | tail -n 1 | cut -f1)
  echo "a run carrying .whl sends about $(((tree + wheels) >> 20)) MiB (limit 64 MiB)"
fi
