from remit.cli.main import main

main()
