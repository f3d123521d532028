"""The examples of the Python API's docstrings, read and run as a user would paste them (tests/test_api_examples.py,
and against the finished searches that tests/test_report.py and tests/test_export.py record)."""
from __future__ import annotations

import inspect
import textwrap
from collections.abc import Callable


def example_of(function: Callable) -> str:
    """The code of the `.. testcode::` block of a function's docstring's Example section."""
    doc = inspect.getdoc(function) or ""
    assert "\nExample:\n" in doc, f"{function.__name__}: no Example section"
    lines = doc.split("\nExample:\n", 1)[1].splitlines()
    (at,) = [i for i, line in enumerate(lines) if line.strip() == ".. testcode::"]
    indent = len(lines[at]) - len(lines[at].lstrip())
    block = []
    for line in lines[at + 1:]:
        if line.strip() and len(line) - len(line.lstrip()) <= indent:
            break
        block.append(line)
    code = textwrap.dedent("\n".join(block)).strip()
    assert code.startswith("import raycse"), f"{function.__name__}: the example does not stand alone:\n{code}"
    return code + "\n"


def run_example(function: Callable) -> dict:
    """Run the function's example as a script would (in the working directory the test chose); its names after."""
    namespace = {"__name__": "__main__"}
    exec(compile(example_of(function), f"<example of raycse.{function.__name__}>", "exec"), namespace)
    return namespace
