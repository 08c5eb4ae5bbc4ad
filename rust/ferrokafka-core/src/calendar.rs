//! UTC calendar arithmetic on plain integers: day numbers, "YYYY-MM-DD" strings.
//!
//! Invariants: a *day number* counts days since 1970-01-01 (negative before it); conversions are
//! exact for the whole `i64` range of seconds that the core accepts (years -9999..=9999 when
//! formatting). Proleptic Gregorian calendar, no leap seconds, no clock reads, no time zones.

/// Seconds in a UTC day.
pub const SECONDS_PER_DAY: i64 = 86_400;

/// Day number of the civil date `year-month-day` (month 1..=12, day 1..=31).
pub fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month = i64::from(month);
    let shifted_month = if month > 2 { month - 3 } else { month + 9 };
    let day_of_year = (153 * shifted_month + 2) / 5 + i64::from(day) - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// The civil date `(year, month, day)` of a day number; inverse of [`days_from_civil`].
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let days = days + 719_468;
    let era = days.div_euclid(146_097);
    let day_of_era = days - era * 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let shifted_month = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * shifted_month + 2) / 5 + 1;
    let month = if shifted_month < 10 {
        shifted_month + 3
    } else {
        shifted_month - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    // Both values are small by construction (1..=31, 1..=12).
    (year, month as u32, day as u32)
}

/// Day number of the UTC day containing the Unix time `epoch_secs`.
pub fn day_of_epoch_secs(epoch_secs: i64) -> i64 {
    epoch_secs.div_euclid(SECONDS_PER_DAY)
}

/// Formats a day number as `"YYYY-MM-DD"`.
pub fn format_day(days: i64) -> String {
    let (year, month, day) = civil_from_days(days);
    format!("{year:04}-{month:02}-{day:02}")
}

/// Parses a strict `"YYYY-MM-DD"` (four-digit year, valid month and day) into a day number.
pub fn parse_day(text: &str) -> Option<i64> {
    let bytes = text.as_bytes();
    if bytes.len() != 10 || bytes[4] != b'-' || bytes[7] != b'-' {
        return None;
    }
    let number = |range: std::ops::Range<usize>| -> Option<u32> {
        let digits = text.get(range)?;
        if digits.bytes().all(|b| b.is_ascii_digit()) {
            digits.parse().ok()
        } else {
            None
        }
    };
    let (year, month, day) = (number(0..4)?, number(5..7)?, number(8..10)?);
    let days = days_from_civil(i64::from(year), month, day);
    (civil_from_days(days) == (i64::from(year), month, day)).then_some(days)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_dates() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
        assert_eq!(format_day(day_of_epoch_secs(1_700_000_000)), "2023-11-14");
        assert_eq!(format_day(day_of_epoch_secs(-1)), "1969-12-31");
        assert_eq!(parse_day("2024-02-29"), Some(days_from_civil(2024, 2, 29)));
    }

    #[test]
    fn rejects_malformed_days() {
        for bad in [
            "2023-02-29",
            "2023-13-01",
            "2023-1-01",
            "+023-01-01",
            "2023-01-0x",
            "",
        ] {
            assert_eq!(parse_day(bad), None, "{bad}");
        }
    }

    #[test]
    fn round_trips_over_four_centuries() {
        for days in (-146_097..2 * 146_097).step_by(7) {
            let (year, month, day) = civil_from_days(days);
            assert_eq!(days_from_civil(year, month, day), days);
        }
    }
}
