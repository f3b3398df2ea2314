"""Pure statistics over episode trees: per-workflow statistics (`episodes`), answer scores with bootstrap
intervals (`scores`), and paired tests between two runs on the same questions (`paired`). No I/O."""
