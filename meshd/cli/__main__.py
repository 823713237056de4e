from meshd.cli import main

main()
