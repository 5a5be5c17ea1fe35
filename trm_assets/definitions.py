"""The code location: gathers assets, checks, jobs, sensors and resources into one Definitions."""

import dagster as dg

from trm_assets.defs import checks, jobs, sensors
from trm_assets.defs.assets import pools as pools_assets
from trm_assets.defs.assets import training
from trm_assets.defs.resources import default_resource

defs = dg.Definitions(
    assets=dg.load_assets_from_modules([pools_assets, training]),
    asset_checks=dg.load_asset_checks_from_modules([pools_assets, checks]),
    jobs=[jobs.gate_step, jobs.slow_update, jobs.finalize, jobs.epoch_job],
    sensors=[sensors.epoch_sensor],
    resources={"trm": default_resource()},
)
