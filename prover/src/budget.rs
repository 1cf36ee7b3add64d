//! One byte budget for the whole process.
