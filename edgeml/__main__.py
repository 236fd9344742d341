from edgeml.cli import main

main()
