"""Feature selection: DFS (private and as published) and the t-test baseline."""
from ._dfs import DPFisherSelector
from ._release import DFSRelease
from ._ttest import TTestSelector

__all__ = ["DPFisherSelector", "DFSRelease", "TTestSelector"]
