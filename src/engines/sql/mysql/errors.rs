//! MySQL/MariaDB's driver errors in the shared [`Failure`] kinds, by server error number.

use crate::engines::sql::errors::Failure;
use crate::support::error::Cause;
use sqlx::error::DatabaseError;
use sqlx::mysql::MySqlDatabaseError;

const ER_DBACCESS_DENIED_ERROR: u16 = 1044;
const ER_ACCESS_DENIED_ERROR: u16 = 1045;
const ER_BAD_DB_ERROR: u16 = 1049;
const ER_NET_PACKET_TOO_LARGE: u16 = 1153;
const ER_NO_SUCH_TABLE: u16 = 1146;
const ER_LOCK_WAIT_TIMEOUT: u16 = 1205;
const ER_LOCK_DEADLOCK: u16 = 1213;
const ER_SERVER_SHUTDOWN: u16 = 1053;
const ER_CON_COUNT_ERROR: u16 = 1040;
const ER_OPTION_PREVENTS_STATEMENT: u16 = 1290;
const ER_CANT_EXECUTE_IN_READ_ONLY_TRANSACTION: u16 = 1792;
const ER_READ_ONLY_MODE: u16 = 1836;

/// The names mysql2 gives the error numbers an application meets (connection, access, schema,
/// locking, limits, constraint and data errors); an unlisted number keeps its errno and
/// SQLSTATE, without a name.
const MYSQL2_NAMES: &[(u16, &str)] = &[
    (1005, "ER_CANT_CREATE_TABLE"),
    (1007, "ER_DB_CREATE_EXISTS"),
    (1008, "ER_DB_DROP_EXISTS"),
    (1021, "ER_DISK_FULL"),
    (1037, "ER_OUTOFMEMORY"),
    (1040, "ER_CON_COUNT_ERROR"),
    (1041, "ER_OUT_OF_RESOURCES"),
    (1043, "ER_HANDSHAKE_ERROR"),
    (1044, "ER_DBACCESS_DENIED_ERROR"),
    (1045, "ER_ACCESS_DENIED_ERROR"),
    (1046, "ER_NO_DB_ERROR"),
    (1047, "ER_UNKNOWN_COM_ERROR"),
    (1048, "ER_BAD_NULL_ERROR"),
    (1049, "ER_BAD_DB_ERROR"),
    (1050, "ER_TABLE_EXISTS_ERROR"),
    (1051, "ER_BAD_TABLE_ERROR"),
    (1053, "ER_SERVER_SHUTDOWN"),
    (1054, "ER_BAD_FIELD_ERROR"),
    (1061, "ER_DUP_KEYNAME"),
    (1062, "ER_DUP_ENTRY"),
    (1064, "ER_PARSE_ERROR"),
    (1114, "ER_RECORD_FILE_FULL"),
    (1129, "ER_HOST_IS_BLOCKED"),
    (1130, "ER_HOST_NOT_PRIVILEGED"),
    (1142, "ER_TABLEACCESS_DENIED_ERROR"),
    (1143, "ER_COLUMNACCESS_DENIED_ERROR"),
    (1146, "ER_NO_SUCH_TABLE"),
    (1149, "ER_SYNTAX_ERROR"),
    (1152, "ER_ABORTING_CONNECTION"),
    (1153, "ER_NET_PACKET_TOO_LARGE"),
    (1156, "ER_NET_PACKETS_OUT_OF_ORDER"),
    (1158, "ER_NET_READ_ERROR"),
    (1159, "ER_NET_READ_INTERRUPTED"),
    (1160, "ER_NET_ERROR_ON_WRITE"),
    (1161, "ER_NET_WRITE_INTERRUPTED"),
    (1180, "ER_ERROR_DURING_COMMIT"),
    (1184, "ER_NEW_ABORTING_CONNECTION"),
    (1203, "ER_TOO_MANY_USER_CONNECTIONS"),
    (1205, "ER_LOCK_WAIT_TIMEOUT"),
    (1206, "ER_LOCK_TABLE_FULL"),
    (1213, "ER_LOCK_DEADLOCK"),
    (1226, "ER_USER_LIMIT_REACHED"),
    (1227, "ER_SPECIFIC_ACCESS_DENIED_ERROR"),
    (1264, "ER_WARN_DATA_OUT_OF_RANGE"),
    (1290, "ER_OPTION_PREVENTS_STATEMENT"),
    (1317, "ER_QUERY_INTERRUPTED"),
    (1366, "ER_TRUNCATED_WRONG_VALUE_FOR_FIELD"),
    (1406, "ER_DATA_TOO_LONG"),
    (1451, "ER_ROW_IS_REFERENCED_2"),
    (1452, "ER_NO_REFERENCED_ROW_2"),
    (1792, "ER_CANT_EXECUTE_IN_READ_ONLY_TRANSACTION"),
    (1836, "ER_READ_ONLY_MODE"),
    (3024, "ER_QUERY_TIMEOUT"),
    (4031, "ER_CLIENT_INTERACTION_TIMEOUT"),
];

/// The name mysql2 gives a server error number.
pub fn mysql2_name(number: u16) -> Option<&'static str> {
    MYSQL2_NAMES
        .iter()
        .find(|(n, _)| *n == number)
        .map(|(_, name)| *name)
}

/// As mysql2 gives it: the symbolic name as `code`, the number as `errno`, and the SQLSTATE.
pub fn cause(db: &dyn DatabaseError) -> Cause {
    match db.try_downcast_ref::<MySqlDatabaseError>() {
        Some(my) => Cause {
            code: mysql2_name(my.number()).map(str::to_owned),
            message: my.message().to_owned(),
            errno: Some(my.number().into()),
            sql_state: my.code().map(str::to_owned),
        },
        None => Cause::new(None, db.message()),
    }
}

/// The server takes no writes: `read_only` / `super_read_only` (1290, which also answers other
/// options' refusals, told apart by naming the option), a read-only transaction (1792), a
/// read-only mode (1836). It is no longer a writer for this DSN.
pub fn refuses_writes(db: &dyn DatabaseError) -> bool {
    match db
        .try_downcast_ref::<MySqlDatabaseError>()
        .map(|e| e.number())
    {
        Some(ER_OPTION_PREVENTS_STATEMENT) => {
            db.message().contains("read-only") || db.message().contains("read_only")
        }
        Some(ER_CANT_EXECUTE_IN_READ_ONLY_TRANSACTION | ER_READ_ONLY_MODE) => true,
        _ => false,
    }
}

pub fn classify_database(db: &dyn DatabaseError) -> Failure {
    if refuses_writes(db) {
        return Failure::Connection;
    }
    match db
        .try_downcast_ref::<MySqlDatabaseError>()
        .map(|e| e.number())
    {
        Some(ER_NO_SUCH_TABLE) => Failure::NotFound,
        Some(ER_LOCK_DEADLOCK | ER_LOCK_WAIT_TIMEOUT) => Failure::Transient,
        Some(ER_ACCESS_DENIED_ERROR | ER_DBACCESS_DENIED_ERROR | ER_BAD_DB_ERROR) => {
            Failure::Refused
        }
        Some(ER_SERVER_SHUTDOWN | ER_CON_COUNT_ERROR) => Failure::Connection,
        _ => Failure::Other,
    }
}
/// The server's message with its error number, and what to do about an oversized packet.
pub fn describe(db: &dyn DatabaseError) -> String {
    match db.try_downcast_ref::<MySqlDatabaseError>() {
        Some(my) if my.number() == ER_NET_PACKET_TOO_LARGE => format!(
            "{} (the statement exceeded the server's max_allowed_packet; raise max_allowed_packet)",
            my.message()
        ),
        Some(my) => format!("{} (error {})", my.message(), my.number()),
        None => db.message().to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_errors_an_application_meets_as_mysql2_does() {
        for (number, name) in [
            (ER_NO_SUCH_TABLE, "ER_NO_SUCH_TABLE"),
            (ER_ACCESS_DENIED_ERROR, "ER_ACCESS_DENIED_ERROR"),
            (ER_DBACCESS_DENIED_ERROR, "ER_DBACCESS_DENIED_ERROR"),
            (ER_BAD_DB_ERROR, "ER_BAD_DB_ERROR"),
            (ER_LOCK_DEADLOCK, "ER_LOCK_DEADLOCK"),
            (ER_LOCK_WAIT_TIMEOUT, "ER_LOCK_WAIT_TIMEOUT"),
            (ER_NET_PACKET_TOO_LARGE, "ER_NET_PACKET_TOO_LARGE"),
            (ER_SERVER_SHUTDOWN, "ER_SERVER_SHUTDOWN"),
            (ER_CON_COUNT_ERROR, "ER_CON_COUNT_ERROR"),
            (1062, "ER_DUP_ENTRY"),
            (1142, "ER_TABLEACCESS_DENIED_ERROR"),
        ] {
            assert_eq!(mysql2_name(number), Some(name));
        }
        assert_eq!(mysql2_name(1927), None);
    }
}
