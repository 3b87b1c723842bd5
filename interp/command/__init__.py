"""What every command line shares: the parser and one-line errors (cli.py), what python -m may run (entry.py),
signals as interrupts (signals.py), progress bars (progress.py).

    cli.py         Parser and DocParser (one-line usage errors), default_option and the other option types,
                   run_writing_command, one_line_errors
    entry.py       python -m on a library module: one line naming the package's commands, exit 2
    progress.py    progress_bar: the one tqdm bar every command draws (off, as wide as the terminal, left or not)
    signals.py     SIGTERM and SIGHUP raised as interrupts, so every command handles them like Ctrl-C;
                   interrupt_code, the exit status of an interrupt
"""
