"""Stream sources: reproducible out-of-order file replay, the cluster scenario, the host monitor.

Each source yields pandas DataFrames (for batch archiving) and registers a Spark 4
Python Data Source (for live streaming).
"""
