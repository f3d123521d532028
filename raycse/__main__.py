from raycse.cli import run

run()
