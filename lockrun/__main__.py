from lockrun.cli.commands import main

main()
