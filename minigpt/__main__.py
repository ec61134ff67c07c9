import sys

from minigpt.cli import main

sys.exit(main())
