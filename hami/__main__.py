from hami.cli import main

raise SystemExit(main())
