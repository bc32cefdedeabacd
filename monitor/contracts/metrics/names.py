"""The namespace every family's name starts with (`ragmon_`): the names are the contract, so the
prefix is one constant every group of the package builds them from."""

PREFIX = "ragmon_"
