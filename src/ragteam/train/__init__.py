"""Training: episode trees + credit -> samples -> SFT, DPO, PRM and PPO updates of the shared policy.

`losses` holds the maths as small pure torch functions; the trainers are configs plus one function each.
Nothing is imported here, so `import ragteam.train` stays cheap (no torch until a submodule is used).
"""
