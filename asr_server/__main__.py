from asr_server.cli import main

raise SystemExit(main())
