#!/usr/bin/env bash
# Prepares `.whl/` (git-ignored) for the device machine: the wheels that its image lacks, for CPython 3.12 on x86-64,
# with Ray repacked without its Java jar and dashboard web client, and its three native binaries (the cluster
# daemons gcs_server and raylet, and _raylet.so: 21 MiB deflated in the wheel) stripped of symbols and carried
# beside it as `ray-native.tar.xz` (20 MiB), which run.sh unpacks over the installed wheel: `ray.init()` then starts
# a local cluster on the device (the `sweep` part). About 34 MiB in all; the tracked tree must stay under 30 MiB
# (benchmarks/gpu/aside.sh moves the files the call does not need out of it). Run here, once, from the repository
# root; then `benchmarks/gpu/run.sh` is the command on the device.
set -euo pipefail
cd "$(dirname "$0")/../.."
exclude=$(git rev-parse --git-path info/exclude)  # a worktree's .git is a file
mkdir -p "$(dirname "$exclude")" && { grep -qx '/.whl/' "$exclude" 2>/dev/null || echo '/.whl/' >> "$exclude"; }
mkdir -p .whl
PLAT=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64
      --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64
      --platform manylinux_2_5_x86_64)
# Packages the device image lacks (its own torch, numpy, pyarrow, pandas, scipy, h5py ... are used as they are).
PKGS=(ray==2.60.0 gymnasium==1.2.2 farama-notifications==0.0.6 dm-tree==0.1.10 lz4==4.4.5 ormsgpack==1.13.1
      tensorboardX==2.6.5 pydantic==2.14.4 pydantic_core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5
      jsonschema==4.26.0 jsonschema-specifications==2025.9.1 referencing==0.37.0 rpds-py==2026.9.1
      dsrl==0.1.0)  # dsrl: the task registry reads its infos.py (installed --no-deps, as here)
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp "${PLAT[@]}" \
    -d .whl "${PKGS[@]}"
python3 - <<'PY'
"""Repack Ray's wheel without what a sweep never loads (Java, the dashboard's web client, serving), and move its
native binaries, stripped and xz-compressed, into .whl/ray-native.tar.xz (run.sh unpacks them over the install)."""
import pathlib, subprocess, tarfile, tempfile, zipfile
src = next(pathlib.Path(".whl").glob("ray-*.whl"))
drop = ("ray/jars/", "ray/dashboard/client/build/", "ray/serve/", "ray/llm/")  # Java, web client, serving
native = ("ray/core/src/ray/gcs/gcs_server", "ray/core/src/ray/raylet/raylet", "ray/_raylet.so")
with zipfile.ZipFile(src) as zin:
    items = [i for i in zin.infolist() if not i.filename.startswith(drop + native)]
    if len(items) < len(zin.infolist()):  # not repacked yet
        with tempfile.TemporaryDirectory() as work, \
                tarfile.open(".whl/ray-native.tar.xz", "w:xz", preset=9) as tar:
            for name in native:
                path = pathlib.Path(zin.extract(name, work))
                subprocess.run(["strip", "--strip-unneeded", str(path)], check=True)  # symbols: half the size
                path.chmod(0o755)
                tar.add(path, arcname=name)
        tmp = src.with_suffix(".tmp")
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as zout:
            for item in items:
                zout.writestr(item, zin.read(item.filename))
        tmp.replace(src)  # the same wheel name: pip installs it as ray 2.60.0 (RECORD lists files it lacks)
PY
du -sh .whl
