"""What every command line shares: the parser and one-line errors (cli.py),
signals as interrupts (signals.py).

    cli.py         Parser and DocParser (one-line usage errors), default_option and the other option types,
                   run_writing_command, one_line_errors
    signals.py     SIGTERM and SIGHUP raised as interrupts, so every command handles them like Ctrl-C;
                   interrupt_code, the exit status of an interrupt
"""
