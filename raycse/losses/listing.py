"""`raycse losses`: every loss as its declaration states it, the built-in ones, those installed distributions declare
(entry points), and any the user names, each loaded and checked as a search would.
"""

from __future__ import annotations

from .catalogue import BASES, PRESET_INFO, PRESETS, REGULARISER_INFO
from .declaration import REGULARISER_WEIGHT, Declaration, Hyperparameter

NEEDS = (("supervised", "supervised triplets (sup_data)"), ("dropout_off_pass", "a dropout-off pass (z0)"),
         ("complementary", "a complementary model (stage 0 trains one)"))
WIDTH = 14


def hyperparameter_words(spec: Hyperparameter) -> str:
    """'0.05 (> 0, log scale)': the default, the range, and how it varies."""
    words = [spec.allowed.removeprefix("must be ")]
    if spec.log:
        words.append("log scale")
    return f"{spec.default:g} ({', '.join(words)})"


def block(declaration: Declaration, extra: str = "") -> list[str]:
    """A loss's lines: name and summary; paper and section; hyperparameters; needs (if any); `extra` (if any)."""
    specs = dict(declaration.hyperparameters)
    if declaration.regulariser:
        specs = {REGULARISER_WEIGHT: declaration.weight, **specs}
    hyper = ", ".join(f"{name} {hyperparameter_words(spec)}" for name, spec in specs.items()) or "none"
    paper = "; ".join(part for part in (declaration.paper, declaration.section) if part) or "(no paper given)"
    lines = [f"  {declaration.name:<{WIDTH}} {declaration.summary}", f"  {'':<{WIDTH}} {paper}",
             f"  {'':<{WIDTH}} hyperparameters: {hyper}"]
    needs = [words for flag, words in NEEDS if getattr(declaration, flag)]
    if needs:
        lines.append(f"  {'':<{WIDTH}} needs: {'; '.join(needs)}")
    if extra:
        lines.append(f"  {'':<{WIDTH}} {extra}")
    return lines


def format_losses(references: list[str] | tuple[str, ...] = ()) -> str:
    """The listing; each of `references` (a user's loss) is loaded and tried first, a ConfigError if it fails."""
    from . import own

    yours = [own.resolve(reference) for reference in references]
    lines = ["losses (--loss; a space file's loss:)"]
    for declaration in BASES.values():
        lines += block(declaration)
    lines.append("regularisers (--reg, weighted by --lambda)")
    for declaration in REGULARISER_INFO.values():
        lines += block(declaration)
    lines.append("presets (--loss)")
    for name, (base, reg) in PRESETS.items():
        preset = PRESET_INFO.get(name)
        lines.append(f"  {name:<{WIDTH}} {base} + lambda x {reg}" + (f"; {preset.paper}" if preset else ""))
    installed = own.entry_points()
    if installed:
        lines.append(f"installed (entry points of the {own.LOSS_ENTRY_POINTS} group)")
        for name, value in installed.items():
            lines += _installed(name, value)
    if yours:
        lines.append("yours")
        for source in yours:
            declaration = own.load_term(source.key).declaration
            lines += block(declaration, f"{source.reference}: {source.path} (SHA-256 {source.sha256[:12]})")
    lines.append("Your own loss: a Term subclass with its declaration, named in a space file as ./my_loss.py:MyLoss "
                 "(docs/own-loss.md); `raycse losses ./my_loss.py:MyLoss` checks it.")
    return "\n".join(lines)


def _installed(name: str, value: str) -> list[str]:
    from ..errors import ConfigError
    from . import own

    try:
        return block(own.load_term(name).declaration, value)
    except ConfigError as err:
        return [f"  {name:<{WIDTH}} cannot be loaded: {err}"]


__all__: list[str] = []
