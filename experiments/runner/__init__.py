"""The runner every experiment is written against: the frame (plan, train, analyse, report), --analyse-only,
the cost preface, and the report's text and figures."""
