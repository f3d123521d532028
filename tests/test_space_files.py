"""The shipped space files: one copy in git, in the package (what a wheel and an editable install carry), which a
clone also shows as search_spaces/ (a symbolic link); `--space focal` names the packaged file from any directory, and a
path still works."""
from __future__ import annotations

import compileall
import os
import shutil
import site
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

from raycse.errors import ConfigError
from raycse.settings.space import load_space
from raycse.settings.space_files import PACKAGED_DIR, packaged_spaces, resolve_space, summary_line

ROOT = Path(__file__).resolve().parent.parent
CLONE_DIR = ROOT / "search_spaces"


def test_git_holds_one_copy_of_each_space_file_and_search_spaces_shows_it():
    tracked = subprocess.run(["git", "ls-files", "-s"], cwd=ROOT, capture_output=True, text=True, check=True,
                             timeout=60).stdout.splitlines()
    paths = [line.split("\t")[1] for line in tracked]
    yaml_names = [Path(path).name for path in paths
                  if path.endswith(".yaml") and (path.startswith("search_spaces/") or "/spaces/" in path)]
    assert sorted(yaml_names) == sorted(path.name for path in PACKAGED_DIR.glob("*.yaml")), "a space file twice"
    (link,) = [line for line in tracked if line.split("\t")[1] == "search_spaces"]
    assert link.startswith("120000 "), "search_spaces is a symbolic link in git"
    assert os.readlink(CLONE_DIR) == "raycse/settings/spaces"
    assert (CLONE_DIR / "focal.yaml").samefile(PACKAGED_DIR / "focal.yaml")


def test_a_packaged_name_resolves_from_any_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no search_spaces/ here
    space = load_space("focal")
    assert Path(space.path) == PACKAGED_DIR / "focal.yaml"
    assert space.experiment == "raycse-focal" and "focal" in space.families
    assert set(packaged_spaces()) >= {"focal", "simcse", "all"}
    assert all(summary_line(path) for path in packaged_spaces().values()), "a shipped file without a summary line"


def test_a_path_still_works_and_wins_over_a_packaged_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    mine = (CLONE_DIR / "focal.yaml").read_text().replace("experiment: raycse-focal", "experiment: mine")
    Path("my-focal.yaml").write_text(mine)
    assert load_space("my-focal.yaml").experiment == "mine"
    Path("focal").write_text(mine)  # a file beside the user named like a packaged space: the user meant it
    assert resolve_space("focal") == Path("focal")
    assert load_space("focal").experiment == "mine"


def test_an_unknown_name_is_one_error_listing_the_packaged_ones(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"'focl' does not exist.*packaged: all, .*focal"):
        load_space("focl")
    with pytest.raises(ConfigError, match="does not exist"):  # a path is never looked up among the packaged ones
        load_space("spaces/focal.yaml")


@pytest.mark.slow
def test_the_wheel_ships_the_space_files(tmp_path):
    """Build the wheel, install it into a fresh venv (torch and the rest found where this interpreter finds them,
    whether it runs in a venv or not), and from an empty directory load `focal` by name through the wheel's own
    raycse, not this checkout's; where the command line has `--dry-run`, the installed `raycse search --space focal
    --dry-run` plans it there too."""
    source = tmp_path / "source"  # a copy, so that setuptools' build/ and egg-info stay out of the checkout
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(ROOT / "raycse", source / "raycse", ignore=shutil.ignore_patterns("__pycache__"))
    compileall.compile_dir(source / "raycse" / "data", quiet=2)  # the bytecode a checkout that ran raycse holds
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", ".", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(wheels)], cwd=source, check=True, timeout=600)
    wheel = next(wheels.glob("raycse-*.whl"))
    with zipfile.ZipFile(wheel) as built:
        shipped = built.namelist()
    assert "raycse/data/wiki_sample.txt" in shipped and not [name for name in shipped if name.endswith(".pyc")]
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", "--no-index",
                    str(wheel)], check=True, timeout=600)
    see_this_interpreters_packages(python)
    empty = tmp_path / "empty"
    empty.mkdir()
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}  # not this checkout's raycse
    check = textwrap.dedent("""
        import sys, raycse
        from pathlib import Path
        from raycse.settings.space import load_space
        space = load_space("focal")
        print(raycse.__file__)
        print(space.path)
        print(space.experiment, sorted(space.families))
        assert Path(raycse.__file__).resolve().is_relative_to(Path(sys.prefix).resolve()), raycse.__file__
        assert Path(space.path).resolve().is_relative_to(Path(sys.prefix).resolve()), space.path
        assert (Path(raycse.__file__).parent / "settings" / "space.schema.json").is_file()
        assert list((Path(raycse.__file__).parent / "evaluation" / "shipped_untouched").glob("*.json"))
    """)
    done = subprocess.run([str(python), "-c", check], cwd=empty, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[-1] == "raycse-focal ['focal']"
    assert not (empty / "search_spaces").exists()
    if "--dry-run" in _search_flags():  # the plan of a packaged space, by the installed command, from nowhere
        done = subprocess.run([str(venv / "bin" / "raycse"), "search", "--space", "focal", "--dry-run", "--step-ms",
                               "100"], cwd=empty, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "focal" in done.stdout
        assert "shipped for this model and data: nothing to score" in done.stdout  # the wheel's untouched figures
        assert sorted(path.name for path in empty.iterdir()) == [], "a dry run created something"


@pytest.mark.slow
def test_an_editable_install_finds_the_space_files(tmp_path):
    """`pip install -e` of a clone (search_spaces/ a link, as git checks it out) into a fresh venv: from an empty
    directory `focal` is the clone's packaged file, which search_spaces/focal.yaml shows too."""
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(ROOT / "raycse", source / "raycse", ignore=shutil.ignore_patterns("__pycache__"))
    os.symlink(os.readlink(CLONE_DIR), source / "search_spaces")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    see_this_interpreters_packages(python)  # setuptools too, which the build below runs in this venv
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps",
                    "--no-build-isolation", "-e", str(source)], check=True, timeout=600, cwd=tmp_path)
    empty = tmp_path / "empty"
    empty.mkdir()
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    check = textwrap.dedent(f"""
        import raycse
        from pathlib import Path
        from raycse.settings.space import load_space
        space = load_space("focal")
        assert Path(raycse.__file__).resolve().is_relative_to({str(source.resolve())!r}), raycse.__file__
        assert Path(space.path).samefile({str(source / "search_spaces" / "focal.yaml")!r}), space.path
        print(space.experiment)
    """)
    done = subprocess.run([str(python), "-c", check], cwd=empty, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[-1] == "raycse-focal"
    assert sorted(empty.iterdir()) == []


def see_this_interpreters_packages(python: Path) -> None:
    """Let the venv of `python` import what this interpreter imports from its site directories (torch, ray, ...),
    after the venv's own. `--system-site-packages` would not do: when this interpreter runs in a venv itself, the
    base interpreter it names holds none of them. The directories go through `site.addsitedir`, so that their own
    .pth files are read too; this checkout's editable raycse, which one of those adds, comes after the venv's own
    site-packages, where the wheel is, so the wheel's raycse is the one imported (the check below asserts it)."""
    inner = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                           capture_output=True, text=True, check=True, timeout=60).stdout.strip()
    outer = [*site.getsitepackages(), *([site.getusersitepackages()] if site.ENABLE_USER_SITE else [])]
    lines = [f"import site; site.addsitedir({directory!r})" for directory in outer if Path(directory).is_dir()]
    (Path(inner) / "zz_outer_site_packages.pth").write_text("\n".join(lines) + "\n")


def _search_flags() -> set[str]:
    from raycse.cli import build_parser

    sub = next(action for action in build_parser()._actions if action.dest == "command")
    return {flag for action in sub.choices["search"]._actions for flag in action.option_strings}


@pytest.mark.parametrize("name", sorted(path.stem for path in (ROOT / "search_spaces").glob("*.yaml")))
def test_every_shipped_space_file_passes_the_checks_of_what_its_trials_read(name):
    """Every corner of every shipped file (full budget and CPU budget) on the bundled data: a file whose full budget
    a GPU user could not start (say, an evaluation interval beyond a batch size's run) fails here, not on a GPU."""
    from raycse.driver.preflight import open_space_inputs
    from raycse.settings.space import load_space

    open_space_inputs(load_space(str(ROOT / "search_spaces" / f"{name}.yaml")))
