"""Front doors that are not the core API: dask, the command line, the demo."""
