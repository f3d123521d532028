"""The built-in losses' form: one file each, holding its function, its declaration and a docstring with its paper and a
runnable example; the catalogue reads the declarations without torch exactly as the classes state them; and a new
loss is one new file, which the registry, the flags and `raycse losses` find by themselves.
"""
from __future__ import annotations

import doctest
import importlib
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from raycse.losses import catalogue
from raycse.losses.term import BUILT_IN

ROOT = Path(__file__).resolve().parent.parent
LOSS_FILES = sorted({module for module in catalogue.MODULE_OF.values()})


def test_every_loss_file_declares_what_the_catalogue_read_without_running_it():
    for name, module in catalogue.MODULE_OF.items():
        imported = importlib.import_module(f"raycse.losses.{module}")
        if name in catalogue.PRESET_INFO:
            (preset,) = [value for value in vars(imported).values() if isinstance(value, catalogue.Preset)]
            assert preset == catalogue.PRESET_INFO[name]
        else:
            assert BUILT_IN[name].declaration == catalogue.DECLARATIONS[name], name
            assert BUILT_IN[name].__module__ == imported.__name__
    assert set(BUILT_IN) == set(catalogue.DECLARATIONS)
    # the properties code branches on come from the declaration
    assert [name for name, d in catalogue.DECLARATIONS.items() if d.complementary] == ["dclr"]
    assert [name for name, d in catalogue.DECLARATIONS.items() if d.supervised] == ["simcse-sup"]
    assert catalogue.DEFAULT_LOSS == "simcse" and BUILT_IN["dclr"].needs_complementary


@pytest.mark.parametrize("module", LOSS_FILES)
def test_every_loss_file_states_its_paper_needs_and_a_runnable_example(module):
    imported = importlib.import_module(f"raycse.losses.{module}")
    docstring = imported.__doc__ or ""
    for part in ("Paper: ", "Needs: ", "Example:\n    >>> "):
        assert part in docstring, f"raycse/losses/{module}.py: its docstring has no {part.strip()!r}"
    finder = doctest.DocTestFinder(recurse=False)
    (test,) = finder.find(imported)
    assert len(test.examples) >= 3
    results = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS).run(test, out=print)
    assert results.failed == 0, f"raycse/losses/{module}.py: its example fails"


def test_no_loss_file_bears_the_name_of_what_it_exports():
    """`raycse.losses.dcl` is the function: a file of that name would replace it once imported."""
    assert not set(catalogue.FILES) & set(catalogue.EXPORTS)


NEW_LOSS = '''
"""A new built-in loss: InfoNCE with the negatives' logits scaled by gamma.

Paper: (a test's). Needs: nothing.

Example:
    >>> 1
    1
"""
import math

from torch import Tensor

from .declaration import Declaration, Hyperparameter
from .infonce import _cross_entropy_diagonal, cos_sim
from .term import Embeddings, Term


def scaled_info_nce(z1: Tensor, z2: Tensor, gamma_scale: float) -> Tensor:
    sim = cos_sim(z1, z2) / 0.05
    return _cross_entropy_diagonal((sim * gamma_scale).diagonal_scatter(sim.diagonal()))


class Scaled(Term):
    declaration = Declaration(name="scaled", summary="InfoNCE, negatives scaled", paper="(a test's)",
                              hyperparameters={"gamma_scale": Hyperparameter(1.0, low=0.0, high=math.inf)},
                              dropout_off_pass=True)

    def forward(self, emb: Embeddings) -> Tensor:
        return scaled_info_nce(emb.z1, emb.z2, **self.hparams)


__all__ = ["scaled_info_nce"]
'''

PROBE = textwrap.dedent("""
    import sys, torch
    from raycse.cli import build_parser, main
    from raycse.losses import LOSS_NAMES, Embeddings, build_loss, scaled_info_nce
    assert "scaled" in LOSS_NAMES and callable(scaled_info_nce)
    loss = build_loss("scaled", gamma_scale=2.0)
    assert loss.needs_z0 and loss.hparams == {"gamma_scale": 2.0}
    print(bool(torch.isfinite(loss(Embeddings(torch.randn(4, 3), torch.randn(4, 3))))))
    parser = build_parser()
    sub = next(action for action in parser._actions if action.dest == "command")
    print("--gamma-scale" in sub.choices["train"].format_help())
    main(["losses"])
""")


@pytest.mark.slow  # a copy of the package and a fresh interpreter that imports torch
def test_a_new_built_in_loss_is_one_new_file(tmp_path):
    """Drop one file into (a copy of) raycse/losses/: build_loss, the lazy exports, the `raycse train` flags and
    `raycse losses` know it, and nothing else was edited."""
    shutil.copytree(ROOT / "raycse", tmp_path / "raycse",
                    ignore=shutil.ignore_patterns("__pycache__", "*.txt", "*.tsv", "*.csv", "*.gz", "senteval"))
    (tmp_path / "raycse" / "losses" / "scaled.py").write_text(NEW_LOSS)
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[:2] == ["True", "True"]
    assert any(line.startswith("  scaled ") for line in lines) and "gamma_scale 1 (>= 0)" in done.stdout
