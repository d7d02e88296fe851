#!/usr/bin/env bash
# Wheels the GPU machine's image lacks (it has torch, triton, click, rich, numpy, safetensors, …): SGLang's
# kernel module and what it imports, and jsonschema. Python 3.12, manylinux x86-64; into .whl/ (git-ignored).
set -euo pipefail
cd "$(dirname "$0")/.."
platforms=(--platform manylinux_2_34_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64
           --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform any)
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  "${platforms[@]}" -d .whl sglang==0.5.23 orjson==3.13.0 pybase64==1.5.1 msgspec==0.23.0 pyzmq==27.3.0 \
  jsonschema==4.26.0 jsonschema-specifications referencing rpds-py starlette==1.10.0 ipython==9.18.1 \
  pydantic==2.14.4 pydantic-core typing-inspection annotated-types \
  decorator jedi parso matplotlib-inline traitlets pexpect ptyprocess prompt-toolkit wcwidth stack-data \
  executing asttokens pure-eval ipython-pygments-lexers
du -sh .whl
