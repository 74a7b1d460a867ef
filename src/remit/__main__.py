from remit.cli import main

main()
