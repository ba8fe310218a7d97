import sys

from trident.cli import main

sys.exit(main())
