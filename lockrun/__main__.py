from lockrun.cli import main

main()
