"""The event log: its record contract, stores, writer API, tailer and publisher."""
