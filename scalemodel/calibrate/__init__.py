"""Calibration: measure a cluster, fit the model's constants, write profiles.

The fitting, parsing and uncertainty parts need only numpy and scipy; the measuring parts
(:mod:`scalemodel.calibrate.compute`, :mod:`scalemodel.calibrate.transport`,
:mod:`scalemodel.calibrate.scaling`) need torch (``pip install 'scalemodel[calibrate]'``)
and are imported on use.
"""
