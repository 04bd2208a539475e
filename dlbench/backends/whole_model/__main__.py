import sys

from dlbench.backends.whole_model.run import main

sys.exit(main())
