"""The code location: gathers assets, checks, jobs, sensors and resources into one Definitions."""

from __future__ import annotations

import dagster as dg

from trm_assets.defs.assets import pools as pools_assets
from trm_assets.defs.resources import TrmResource

defs = dg.Definitions(
    assets=dg.load_assets_from_modules([pools_assets]),
    asset_checks=dg.load_asset_checks_from_modules([pools_assets]),
    resources={"trm": TrmResource()},
)
