"""The maritime scenario's coastal area: a coastline, ports, anchorages, fishing grounds
and protected areas, and the per-row geographic columns the patterns read (T 5.2.1:
"the proximity of vessels to various areas and locations of interest, such as ports,
fishing areas, protected NATURA areas, the coastline").

The area is a plane in kilometres: ``x`` east, ``y`` north of a straight coastline at
``y = 0`` (land is ``y < 0``), mapped to longitude and latitude around Brest, where the
paper's data set lies. Ports sit on the coast, ``PORT_SPACING_KM`` apart, so the
approach of one port (T Def. 5.16: from 10 km down to 5 km) never comes within 7 km of
another. Areas are circles. Every predicate of T Defs. 5.10-5.16 becomes a column, so a
plain SQL predicate (``near_coast AND speed > 5``) reads it, in Moirae and in Flink alike.

>>> import numpy as np
>>> g = geo_columns(np.array([PORT_X[0], 130.0]), np.array([0.2, 40.0]))
>>> g["near_coast"].tolist(), g["nearest_port"].tolist(), g["near_port"].tolist()
([True, False], ['P00', 'P06'], [True, False])
"""

from __future__ import annotations

import math

import numpy as np

#: the area's extent in km (x from 0 to WIDTH_KM, y from the coast up to HEIGHT_KM)
WIDTH_KM, HEIGHT_KM = 240.0, 80.0
PORT_SPACING_KM = 20.0
#: ports on the coast (y = 0), named P00, P01, ...
PORT_X = np.arange(10.0, WIDTH_KM, PORT_SPACING_KM)
PORT_NAMES = np.array([f"P{i:02d}" for i in range(len(PORT_X))], dtype=object)
#: T Def. 5.10: "within 300 meters from the coast"
NEAR_COAST_KM = 0.3
#: T Def. 5.16: a vessel whose distance from the port falls below 5 km has entered it
NEAR_PORT_KM = 5.0
#: anchorage areas (x, y, r) off some ports, inside their 5 km (T Def. 5.11)
ANCHORAGES = ((PORT_X[1] + 2.0, 3.0, 1.0), (PORT_X[5] - 2.0, 3.0, 1.0), (PORT_X[9], 3.5, 1.0))
#: fishing grounds (x, y, r), offshore (T Def. 5.13)
FISHING = ((50.0, 50.0, 12.0), (130.0, 55.0, 14.0), (200.0, 40.0, 10.0))
#: protected (NATURA) areas (x, y, r)
PROTECTED = ((90.0, 30.0, 8.0), (30.0, 70.0, 7.0), (170.0, 70.0, 8.0))
#: the open-sea lanes where normal traffic sails: far from ports and the coast
LANE_Y_KM = (15.0, HEIGHT_KM - 5.0)

LON0, LAT0 = -5.6, 47.9
_KM_PER_DEG_LAT = 110.57
_KM_PER_DEG_LON = 111.32 * math.cos(math.radians(LAT0 + HEIGHT_KM / 2 / _KM_PER_DEG_LAT))


def to_lonlat(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Longitude and latitude (degrees) of plane points (km)."""
    return LON0 + np.asarray(x) / _KM_PER_DEG_LON, LAT0 + np.asarray(y) / _KM_PER_DEG_LAT


def _in_any(x: np.ndarray, y: np.ndarray, circles) -> np.ndarray:
    out = np.zeros(len(x), dtype=bool)
    for cx, cy, r in circles:
        out |= np.hypot(x - cx, y - cy) < r
    return out


def in_fishing(x: np.ndarray, y: np.ndarray, margin: float = 0.0) -> np.ndarray:
    """Inside a fishing ground (by at least ``margin`` km when positive)."""
    return _in_any(x, y, [(cx, cy, r - margin) for cx, cy, r in FISHING])


def port_distances(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(index of the nearest port, its distance in km) per point."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    idx = np.clip(np.rint((x - PORT_X[0]) / PORT_SPACING_KM), 0, len(PORT_X) - 1).astype(int)
    return idx, np.hypot(x - PORT_X[idx], y)


def geo_columns(x: np.ndarray, y: np.ndarray) -> dict[str, np.ndarray]:
    """The geographic columns of rows at plane points (km): ``lon``, ``lat``,
    ``dist_coast_km``, ``dist_port_km``, ``nearest_port``, ``near_coast``, ``near_port``,
    ``in_anchorage``, ``in_fishing``, ``in_protected``."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    lon, lat = to_lonlat(x, y)
    idx, dport = port_distances(x, y)
    dcoast = np.maximum(y, 0.0)
    return {
        "lon": np.round(lon, 6), "lat": np.round(lat, 6),
        "dist_coast_km": np.round(dcoast, 4), "dist_port_km": np.round(dport, 4),
        "nearest_port": PORT_NAMES[idx],
        "near_coast": dcoast < NEAR_COAST_KM, "near_port": dport < NEAR_PORT_KM,
        "in_anchorage": _in_any(x, y, ANCHORAGES), "in_fishing": in_fishing(x, y),
        "in_protected": _in_any(x, y, PROTECTED),
    }


def angle_diff(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The smallest absolute difference of two angles in degrees (0-180)."""
    d = np.abs((np.asarray(a, float) - np.asarray(b, float)) % 360.0)
    return np.minimum(d, 360.0 - d)
