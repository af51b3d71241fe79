import sys

from real_backend.zoo.cli import main

sys.exit(main())
