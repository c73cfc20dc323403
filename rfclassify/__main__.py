import sys

from rfclassify.cli import main

sys.exit(main())
