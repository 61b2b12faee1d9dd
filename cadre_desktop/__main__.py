from cadre_desktop.cli import main

raise SystemExit(main())
