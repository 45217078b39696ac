from hermes_stack.cli import main

raise SystemExit(main())
