import sys

from simtrain.cli import main

sys.exit(main())
