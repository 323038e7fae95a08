import sys

from patchtool.cli import main

sys.exit(main())
