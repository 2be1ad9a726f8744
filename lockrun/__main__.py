from lockrun.cli.entry import main

main()
