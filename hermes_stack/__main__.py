from hermes_stack.controller.cli import main

raise SystemExit(main())
