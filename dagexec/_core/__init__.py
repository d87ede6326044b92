"""The graph, its checks, the plan, and what a run hands back: pure data, no threads.

Everything above builds on this layer; it imports nothing else of dagexec.
"""
