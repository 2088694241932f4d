// Timeline (to be filled by the `ptdp simulate` work).
#pragma once
