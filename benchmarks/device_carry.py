"""Make what benchmarks/gpu_suite.sh's device calls carry, and check each call against the 64 MiB it may carry.

    python benchmarks/device_carry.py          # .whl/ (call 1) and .gpu/ (call 2); both git-ignored

The lent GPU machine reaches no package index and has no packaged MiniLM; a call carries the working tree (tracked
files and untracked ones that git does not ignore) and the ignored paths it names, 64 MiB in all. What the suite
needs (about 127 MB with the tree twice) cannot travel in one call, so it is split in two:

* call 1 carries `.whl/`: the wheels of benchmarks/device_wheels.txt for Python 3.12 (ray, optuna, mlflow-skinny and
  what they need beyond the image), less those of call 2. Ray's wheel is slimmed: its Java jar (`ray/jars/`, 31 MiB:
  Java workers), the dashboard's web client (`ray/dashboard/client/`: raycse starts no dashboard) and the symbol
  tables of its three binaries (`strip --strip-unneeded`: what the dynamic loader reads is kept) are left out.
* call 2 carries `.gpu/`: the fp16 all-MiniLM-L6-v2 (`minilm-fp16/`, benchmarks/minilm_fp16.py) and, in `whl/`,
  the wheels moved there to fit (SQLAlchemy, pydantic-core).

plotly (9.7 MB) fits in neither: the search then writes no report page (raycse's report stage never fails a
search); every figure is in search_summary.json. `--plotly` puts it in `.gpu/whl/` anyway if you have the room.
device_env.sh extracts `.whl/*.whl` and `.gpu/whl/*.whl` into /tmp/site, which outlives a call while the machine
stays warm (30 s after a call): call 2 must follow call 1 within that, or call 1's wheels are gone.
"""
from __future__ import annotations

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]

import argparse  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import zipfile  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(_HERE).parent
LIMIT = 64 * 2**20
PLATFORMS = ["manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
             "manylinux1_x86_64"]
CALL_2_WHEELS = ("sqlalchemy", "pydantic_core")  # moved to .gpu/whl/: the two calls keep about equal margins
RAY_LEFT_OUT = ("ray/jars/", "ray/dashboard/client/")
RAY_BINARIES = ("ray/_raylet.so", "ray/core/src/ray/raylet/raylet", "ray/core/src/ray/gcs/gcs_server")


def pins() -> list[str]:
    lines = (Path(_HERE) / "device_wheels.txt").read_text().splitlines()
    return [line.split("#", 1)[0].strip() for line in lines if line.split("#", 1)[0].strip()]


def download(requirements: list[str], folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "--python-version",
               "3.12", "--implementation", "cp", *[f"--platform={p}" for p in PLATFORMS], "-d", str(folder),
               *requirements]
    subprocess.run(command, check=True)


def slim_ray(wheel: Path) -> Path:
    """The ray wheel less RAY_LEFT_OUT, its binaries stripped; written beside it as ray-...-slim.whl (extracted, not
    pip-installed, on the device: its RECORD is not checked)."""
    target = wheel.with_name(wheel.name.replace(".whl", "-slim.whl"))
    with tempfile.TemporaryDirectory() as scratch, zipfile.ZipFile(wheel) as source, \
            zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as slim:
        for member in source.infolist():
            if member.filename.startswith(RAY_LEFT_OUT):
                continue
            data = source.read(member)
            if member.filename in RAY_BINARIES:
                path = Path(scratch) / "binary"
                path.write_bytes(data)
                subprocess.run(["strip", "--strip-unneeded", str(path)], check=True)
                data = path.read_bytes()
            slim.writestr(member, data)
    wheel.unlink()
    return target


def tree_bytes() -> int:
    """The working tree that every call carries: tracked files and untracked ones git does not ignore."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            check=True, capture_output=True).stdout.split(b"\0")
    return sum((ROOT / name.decode()).stat().st_size for name in listed if name and (ROOT / name.decode()).is_file())


def folder_bytes(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plotly", action="store_true", help="put plotly's wheel in .gpu/whl/ too")
    args = parser.parse_args(argv)
    whl, gpu = ROOT / ".whl", ROOT / ".gpu"
    wanted = [p for p in pins() if args.plotly or not p.lower().startswith("plotly==")]
    shutil.rmtree(whl, ignore_errors=True)
    shutil.rmtree(gpu / "whl", ignore_errors=True)
    download(wanted, whl)
    for wheel in whl.glob("ray-*.whl"):
        slim_ray(wheel)
    (gpu / "whl").mkdir(parents=True, exist_ok=True)
    for wheel in whl.glob("*.whl"):
        if wheel.name.lower().startswith(CALL_2_WHEELS) or wheel.name.lower().startswith("plotly"):
            wheel.rename(gpu / "whl" / wheel.name)
    if not (gpu / "minilm-fp16" / "model.safetensors").is_file():
        subprocess.run([sys.executable, str(Path(_HERE) / "minilm_fp16.py"), "--output", str(gpu / "minilm-fp16")],
                       check=True, cwd=ROOT)
    tree = tree_bytes()
    calls = {"call 1 (.whl)": folder_bytes(whl), "call 2 (.gpu)": folder_bytes(gpu)}
    print(f"the working tree: {tree / 2**20:.1f} MiB, carried by every call")
    worst = 0
    for name, size in calls.items():
        total = tree + size
        worst = max(worst, total)
        print(f"{name}: {size / 2**20:.1f} MiB carried + the tree = {total / 2**20:.1f} MiB of {LIMIT / 2**20:.0f}")
    if worst > LIMIT:
        print("device_carry: error: a call is over the limit", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
