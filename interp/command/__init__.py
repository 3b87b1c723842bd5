"""What every command line shares: the parser and one-line errors (cli.py),
signals as interrupts (signals.py).
"""
