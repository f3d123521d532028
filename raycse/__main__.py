import sys

from raycse.cli import main

sys.exit(main())
