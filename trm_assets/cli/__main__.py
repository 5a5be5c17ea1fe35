from trm_assets.cli.main import main

main()
