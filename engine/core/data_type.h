#pragma once

// DataType: the tensor element types of the KServe v2 protocol, by their protocol names
// ("BOOL", "UINT8", ..., "FP16", "BF16", "FP32", "FP64", "BYTES"). The table lives with the other
// wire rules in common/wire/data_type.h; the engine uses these names for it.

#include "common/wire/data_type.h"

namespace sluice::engine {

using wire::DataType;
using wire::DataTypeByteSize;
using wire::DataTypeFromName;
using wire::DataTypeName;

}  // namespace sluice::engine
