"""``python -m normlab`` (what ``torchrun -m normlab train ...`` runs)."""

import sys

from normlab.cli import main

sys.exit(main())
