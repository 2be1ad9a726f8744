from lockrun.cli.main import main

main()
