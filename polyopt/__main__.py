"""``python -m polyopt`` is the ``polyopt`` command."""
import sys

from polyopt.cli import main

sys.exit(main())
